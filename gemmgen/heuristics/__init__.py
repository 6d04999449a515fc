"""heuristics"""
