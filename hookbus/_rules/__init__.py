"""The rules every layer uses: argument checks, the one conversion of fetched values, which way a
metric is better, and files written whole.
"""
