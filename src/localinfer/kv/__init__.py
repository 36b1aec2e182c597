"""The KV cache and what is kept of it: the cache classes (``cache``), their element types
(``cache_types``), a cache's contents as named arrays (``contents``), the on-disk format of saved
state (``state_file``) and a Context saved and loaded back (``session_state``)."""
