"""Ten ordinary short user prompts, none of them in the demo model's training corpus."""

EVAL_PROMPTS = [
    "Hello!",
    "What is the capital of France?",
    "Count from one to ten.",
    "List three fruits.",
    "How are you today?",
    "Can you explain what a neural network is?",
    "Tell me a joke.",
    "Good morning, who are you?",
    "Name five animals.",
    "Why is the sky blue?",
]
