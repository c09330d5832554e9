"""The supervisor: one owner of the engine state (machine), its loop (actor), and what it may ask for (effects)."""
