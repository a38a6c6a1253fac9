"""The bundled SFT trainer that ``provision launch`` runs inside the image.

Qwen2.5-style chat SFT (full or LoRA) on Ascend NPU, CUDA or CPU, with
padding-free packing, atomic checkpoints and exact resume. torch,
transformers and peft are imported only inside this package, and only once
the config has been validated (see ``cli.py``).
"""
