"""The rules every layer uses: argument checks, the one conversion of fetched values, which way a
metric is better, files written whole, and the face a public name shows as its home.
"""
