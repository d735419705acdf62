//! Planners: KV-cache memory and speculative decoding (see issue "tpcomm plan").
