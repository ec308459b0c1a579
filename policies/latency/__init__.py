"""Per-request time and GPU-second estimates per worker, corrected online from outcomes."""
