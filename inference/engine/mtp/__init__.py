"""Multi-token prediction (MTP) heads as drafters for speculative decoding.

Qwen3.5 / Qwen3-Next (`mtp.*`), DeepSeek V3 and GLM-4.5+ (a NextN layer past the last one) and
MiMo (`model.mtp_layers.*`) ship a small module beside the model, trained to predict the token
after next from the model's last hidden state and the next token's embedding. mlx-lm's loaders
drop those weights (its sanitize filters them); here they are read from the same files.

- families.py: where each family keeps its head in a checkpoint and what its block is (one
  class per layout).
- head.py: the head itself (norms, projection, the family's own decoder layer, final norm) and
  the target split into body and output head, so a step gives hidden states with its logits.
- read.py: finding and loading a model's heads at load time, with the reason when there are
  none or they cannot be read.
- drafter.py: one sequence's MTP drafter (the Drafter seam): it reads the target's hidden
  states as the decode batch and the prompt reader produce them, and chains its own
  guesses from the last one.
"""
