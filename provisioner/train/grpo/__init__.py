"""``method: grpo``: prompt records with reference answers, rule rewards, and the run on TRL's GRPOTrainer.

``data`` and ``rewards`` import neither torch nor TRL (``provision-train --check``
uses them); ``trainer`` maps the trainer config onto TRL and bridges its logs
into the trainer's metrics, checkpoints, memory record and plots.
"""
