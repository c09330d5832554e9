"""DraftVocab: the MTP drafter scores a hot vocabulary instead of all of it, so each draft pass reads a fraction of
the lm_head; the target still verifies every draft with its full lm_head, so the answers stay the target's.

hot_set (plain Python): the setting, the hot-vocabulary file, the control tokens; naive: the reference logits;
hot_head: the hot rows and their logits; drafters: vLLM's drafter classes with it (imports vLLM)."""
