"""TiCDC's storage sink: a directory of schema files and data files, written and read back."""
