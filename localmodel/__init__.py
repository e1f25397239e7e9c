"""localmodel package."""
