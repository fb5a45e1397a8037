"""Tasks: the toy tasks the project generates itself, so that every objective trains without data files.

    reverse.py       string reversal (the encoder-decoder; T5 and BART share its token layout), exact match
    majority.py      does "a" occur more often than "b"? (the GPT classifier)
    key_value.py     random key -> value tables, one per sequence (in-context learning)
    repeated_segment.py  random tokens with one segment repeated at a random distance (induction heads)
    even_digits.py   prompts, careless demonstrations, labelers who prefer even digits (InstructGPT)

Every draw comes from a passed-in seed or Generator.
"""
