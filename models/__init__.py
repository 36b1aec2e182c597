"""The catalog of known models (catalog.json, shipped as package data). See README.md here."""
