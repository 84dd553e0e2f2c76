"""Conversions of existing Keras callback and TensorFlow hook lists into hookbus publishers and sinks."""
