"""codeact: run LLM-written Python that calls tools, in a sandbox, with every call recorded."""
