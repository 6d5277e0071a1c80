"""Image descriptions for the e^d product view (paper §3.5: Qwen3-VL-30B-A3B-Instruct).

:func:`describe_images` asks a vision-language model behind any OpenAI-compatible endpoint (image
URLs sent as ``image_url`` content parts) for a short visual description of each item that has
image URLs, and stores it in ``ItemRecord.image_description``. Without an endpoint, or for items
without images, the description stays None and the e^d view is absent for them; the build manifest
records how many items got one. A failed request leaves the item without a description and is
counted, never invented.
"""

from __future__ import annotations

import logging

from shopping_companion.llm.base import BackendError, ChatBackend, Sampling
from shopping_companion.personalization.data import ItemRecord

__all__ = ["describe_images", "vision_messages"]

log = logging.getLogger(__name__)

_PROMPT = (
    "Describe what this product looks like for a shopper who cannot see the picture: colours, shape, material "
    "and finish, style and overall impression, in two or three sentences. Do not guess the price or the brand."
)


def vision_messages(item: ItemRecord, max_images: int = 2) -> list[dict]:
    """One user message with the prompt, the item's title and up to ``max_images`` image URLs."""
    parts: list[dict] = [{"type": "text", "text": f"{_PROMPT}\nProduct title: {item.title}"}]
    parts += [{"type": "image_url", "image_url": {"url": u}} for u in item.image_urls[:max_images]]
    return [{"role": "user", "content": parts}]


def describe_images(
    items: dict[str, ItemRecord], backend: ChatBackend | None, *, max_images: int = 2, sampling: Sampling | None = None
) -> dict[str, int]:
    """Fill ``image_description`` in place; returns counts ``{"described", "no_images", "failed",
    "skipped_no_endpoint"}``."""
    counts = {"described": 0, "no_images": 0, "failed": 0, "skipped_no_endpoint": 0}
    sp = sampling or Sampling(temperature=0.0, top_p=1.0, top_k=None, max_tokens=256)
    for it in items.values():
        if not it.image_urls:
            counts["no_images"] += 1
            continue
        if backend is None:
            counts["skipped_no_endpoint"] += 1
            continue
        try:
            text = backend.chat(vision_messages(it, max_images), None, sp).content.strip()
        except BackendError as e:
            log.warning("image description failed for %s: %s", it.asin, e)
            counts["failed"] += 1
            continue
        if text:
            it.image_description = text
            counts["described"] += 1
        else:
            counts["failed"] += 1
    return counts
