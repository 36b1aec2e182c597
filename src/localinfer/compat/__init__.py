"""Drop-in faces of other runtimes' Python APIs over localinfer (llama_cpp.py: llama-cpp-python's)."""
