"""Several models, one daemon: the configured models (catalog), each one's parts (slot), which run where
(placement and its owner), and the relay's routing by model name (router)."""
