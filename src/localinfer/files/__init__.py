"""Model files: the GGUF reader (``gguf_file``), the catalog's downloads and the model cache
(``fetch``), files that must be regular files (``regular_file``) and a load's progress
(``load_progress``)."""
