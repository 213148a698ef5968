"""Turning other weight formats into MLX model directories mlx-lm can load."""
