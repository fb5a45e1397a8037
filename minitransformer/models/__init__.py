"""Whole models, each assembled from the layers in `minitransformer.layers`."""
