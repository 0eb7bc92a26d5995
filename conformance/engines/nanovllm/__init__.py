"""nano-vllm's block manager as a manager target."""
