"""SGLang as a target: its RadixCache over its TokenToKVPoolAllocator."""
