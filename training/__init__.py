"""Fine-tuning entry points (run as scripts: ``python training/finetune.py --config ...``)."""
