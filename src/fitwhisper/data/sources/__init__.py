"""Where data comes from, beyond a manifest file: tar shards, shard folders, Hub datasets.

- `spec`: what a data source string names (manifest, shards, Hub dataset; a mix weight)
- `tar_shards`: WebDataset tar shards read as clips (local, `pipe:`, URL), by offset after
- `hub`: Hub datasets and folders in the Hub's layout, streamed by `datasets`
- `records`: any such source's clips as manifest records, so `load_manifest` reads them all
- `units`: a streamed source cut into its shards, for `data/stream.py`
- `write`: `fitwhisper shard`, any source written as tar shards with an index
"""
