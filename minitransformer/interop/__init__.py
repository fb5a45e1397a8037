"""Bridges to other libraries' weight formats (GPT-2 from Hugging Face)."""
