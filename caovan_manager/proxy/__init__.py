"""The OpenAI API proxy: the admission gate and the /v1/* relay."""
