"""The OpenAI-compatible HTTP server over the batching engine: api.py (request shapes and
validation), http.py (routes, streaming, limits), app.py (a model, an engine and a server put together)."""
