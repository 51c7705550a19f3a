"""The networks: the CNN-F backbone (cnnf) and the segmented hashing head (hashing)."""
