"""Packing bounds shared by a plugin and the simulator: the cutting-stock LP."""

from gpusched.packing.cutting_stock import CuttingStock, cutting_stock

__all__ = ["CuttingStock", "cutting_stock"]
