"""Shopping Companion: train and evaluate tool-using LLM shopping agents.

Heavy stacks (Pyserini/JVM, torch, sentence-transformers) are imported lazily by the modules that
need them, so ``import shopping_companion`` stays cheap.
"""

__version__ = "0.1.0"
