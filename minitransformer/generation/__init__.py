"""Generation: turning a trained model into text, one token at a time.

    kv_cache.py   the one key/value cache protocol, for GPT and the encoder-decoder
    sampling.py   GPT: greedy, temperature and top-k sampling (`generate`, `next_token`, `sample_text`)
    decoding.py   encoder-decoder: batched greedy decoding and beam search
    bleu.py       corpus BLEU, to score what the encoder-decoder generates

The generation loops create the caches and hand them down; nothing in the
layers or models imports this floor.
"""
