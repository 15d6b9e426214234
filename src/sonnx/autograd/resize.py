"""Spatial resampling: Resize, Upsample, GridSample, AffineGrid, RoiAlign."""

__all__: list[str] = []
