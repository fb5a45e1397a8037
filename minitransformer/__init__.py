"""minitransformer: a Transformer language model in pure NumPy, every backward pass written by hand.

Shape legend, used in every docstring of the package:

    B   batch size
    T   time (sequence length); Tq, Tk for queries and keys when they differ
    C   channels, the model width d_model
    H   number of attention heads
    hs  head size, C // H
    V   vocabulary size
"""

from .fast import blas_idle  # noqa: F401, I001  (first: before NumPy loads OpenBLAS)
from .gradcheck.checker import check_module, numerical_gradient, rel_error
from .layers.activations import GELU, ReLU
from .layers.attention import ScaledDotProductAttention, causal_mask
from .layers.block import TransformerBlock
from .layers.dropout import Dropout
from .layers.embedding import Embedding
from .layers.feedforward import FeedForward
from .layers.layernorm import LayerNorm
from .layers.linear import Linear
from .layers.lm_head import TiedLMHead
from .layers.loss import CrossEntropyLoss
from .layers.multihead import MultiHeadAttention
from .layers.positional import LearnedPositionalEmbedding, SinusoidalPositionalEncoding, sinusoidal_table
from .layers.softmax import Softmax, softmax
from .models.gpt import GPT, GPTConfig
from .interop.gpt2 import from_gpt2_state_dict, to_gpt2_state_dict
from .core.module import Module
from .core.parameter import Parameter

__version__ = "0.5.0.dev0"

# Attention and position variants: RoPE, ALiBi, GQA, relative positions, sparse and
# sliding-window attention, Transformer-XL memory, LoRA.
from .variants.alibi import ALiBi, alibi_bias, alibi_slopes
from .variants.lora import LoRALinear, LoRAModel, add_lora
from .variants.relative_position import RelativePositionAttention, skew, skew_backward
from .variants.rope import RotaryEmbedding, rotary_angles, rotate
from .variants.sliding_window import BandedAttention, band_mask
from .variants.sparse_masks import fixed_masks, longformer_mask, strided_masks
from .variants.tiled_attention import TiledAttention
from .variants.transformer_xl import TransformerXL, TransformerXLBlock

# Byte-pair encoding: the lecture's loop, the fast trainer, the byte-level tokenizer
from .tokenizers.bpe import BPETokenizer, get_stats, learn_bpe, lecture_vocab, merge_vocab, word_counts_from_text

# --- encoders and encoder-decoders: padding, BLEU, encoder, BERT, seq2seq, decoding, fine-tuning
from .generation.bleu import corpus_bleu
from .generation.decoding import beam_search, greedy_decode
from .layers.decoder_block import DecoderBlock
from .layers.padding import key_padding_mask, lengths_to_mask, pad_sequences
from .models.bert import BertConfig, BertMLM, mask_tokens
from .models.encoder import EncoderConfig, InputEmbedding, TransformerEncoder
from .models.gpt_classifier import FineTuningObjective, GPTClassifier
from .models.seq2seq import Seq2SeqConfig, Seq2SeqTransformer

# Training and sampling: optimizers, schedules, data, trainer, checkpoints, KV cache, sampling.
from .training.checkpoint import (CheckpointError, CheckpointExistsError, load_checkpoint, read_checkpoint,
                                  save_checkpoint)
from .tokenizers import CharTokenizer
from .training.data import default_corpus, get_batch, train_val_split
from .generation.kv_cache import KVCache, LayerKVCache
from .training.optim import SGD, Adam, AdamW, clip_grad_norm, parameter_groups
from .generation.sampling import generate, next_token, sample_text
from .training.schedules import cosine_rate, noam_rate
from .training.config import TrainConfig
from .training.metrics import perplexity
from .objectives.language_model import Trainer
from .training.loop import TrainingDiverged, TrainingInterrupted
from .tokenizers.checks import TokenizerConfigError

# The modern (Llama-style) decoder: RMSNorm, SiLU, SwiGLU; GPT(..., **LLAMA_STYLE)
from .layers.activations import SiLU
from .layers.rmsnorm import RMSNorm
from .layers.swiglu import SwiGLU
from .models.gpt import LLAMA_STYLE
# GPT-2's tokenizer byte for byte, from its two released files
from .tokenizers.gpt2 import GPT2Tokenizer

# The rest of the lectures' systems: WordPiece, T5 and BART objectives, InstructGPT, in-context learning
from .tokenizers.wordpiece import WordPieceTokenizer
from .layers.log_probs import TokenLogProbs
from .layers.ppo_losses import ClippedSurrogateLoss, ValueLoss
from .layers.ranking_loss import PairwiseRankingLoss
from .objectives.denoising import DenoisingTask, span_corruption, text_infilling, token_deletion, token_masking
from .variants.relative_values import RelativeValueAttention

# 0.3's module paths that 0.4 moved (minitransformer.training.trainer, ...tasks, ...encdec, ...objectives), for
# one more version: see _compat.py
from . import _compat

_compat.install()
