"""OutputLock's canary: the engine's decode path checked against its own prefill path, with no stored answer."""
