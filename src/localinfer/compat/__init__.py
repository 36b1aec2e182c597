"""Drop-in faces of other runtimes' Python APIs over localinfer (llama_cpp/: llama-cpp-python's)."""
