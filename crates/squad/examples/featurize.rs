//! `cargo run --release -p qdq-squad --example featurize -- DATASET VOCAB [MAX_SEQ_LEN DOC_STRIDE]`: featurizes a SQuAD
//! file and prints the number of examples, features and tokens, and the time taken.

use qdq_squad::{FeatureConfig, FeatureStream, Padding, load_squad};
use tokenizer::Tokenizer;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [dataset, vocab, rest @ ..] = args.as_slice() else {
        return Err("usage: featurize DATASET VOCAB [MAX_SEQ_LEN DOC_STRIDE]".into());
    };
    let mut config = FeatureConfig::default();
    if let [seq, stride] = rest {
        config.max_seq_len = seq.parse()?;
        config.doc_stride = stride.parse()?;
    }
    let t0 = std::time::Instant::now();
    let data = load_squad(dataset)?;
    let tok = Tokenizer::from_vocab(vocab, true)?;
    let (mut features, mut tokens, mut multi) = (0usize, 0usize, 0usize);
    for batch in FeatureStream::new(&data.examples, &tok, config, 32, Padding::Longest)? {
        let batch = batch?;
        features += batch.len();
        tokens += batch.features.iter().map(|f| f.len()).sum::<usize>();
        multi += batch.features.iter().filter(|f| f.window_index == 1).count();
    }
    println!(
        "examples {} features {features} (examples with >1 window: {multi}) tokens {tokens} in {:.2?}",
        data.examples.len(),
        t0.elapsed()
    );
    Ok(())
}
