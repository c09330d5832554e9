"""The OpenAI API proxy: the admission gate, the /v1/* relay and the route it asks for."""
