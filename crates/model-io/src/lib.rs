//! What a BERT's graph inputs and outputs are, whatever its task ([`roles`]): token ids, attention mask, segment and
//! position ids; start and end logits, class logits, a sentence embedding or token states. Found from what the graph
//! does with each (the op patterns it asks are `qdq`'s, the one place they live), with names as the fallback and the
//! roles a user names first. Every task and the commands read models through it.

pub mod roles;
