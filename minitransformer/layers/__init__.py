"""The layers, one per file, each with `forward` directly above `backward`."""
