"""Data files of benchmark synthesis: the paraphrase lexicon of needle statements
(``paraphrases.yaml``, loaded and validated by :mod:`.paraphrases`)."""
