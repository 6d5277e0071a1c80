"""Long-term memory of a user: session loaders (:mod:`.loaders`: SGD, ShareGPT, Topical-Chat,
LoCoMo, LongMemEval), the MiniLM embedder with its content-hash SQLite cache (:mod:`.embedder`),
the per-user index behind ``mem_search`` / ``mem_view`` (:mod:`.store`), pool-wide shared turn
vectors for many users (:mod:`.bank`) and retrieval-quality measurements (:mod:`.quality`).
Submodules are imported explicitly; importing this package loads nothing heavy."""
