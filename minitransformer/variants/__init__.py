"""Beyond the 2017 model: attention and position variants (RoPE, ALiBi, relative positions, sparse and sliding
windows, Transformer-XL, LoRA, tiled attention), each with a hand-written, gradient-checked backward pass."""
