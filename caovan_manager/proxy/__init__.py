"""The OpenAI API proxy: admission gate and the /v1/* router."""
