"""Private implementation of jaxfp8; import the public modules instead."""
