//! Option validation and parsing.
use std::collections::BTreeMap;

use calib::*;

fn opts(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
}

#[test]
fn parse_defaults_and_values() {
    assert_eq!(Method::parse("minmax", &opts(&[])).unwrap(), Method::MinMax { symmetric: false });
    assert_eq!(
        Method::parse("Percentile", &opts(&[])).unwrap(),
        Method::Percentile { percentile: 99.999, symmetric: false }
    );
    assert_eq!(
        Method::parse("percentile", &opts(&[("percentile", "99.9"), ("symmetric", "true")])).unwrap(),
        Method::Percentile { percentile: 99.9, symmetric: true }
    );
    assert_eq!(Method::parse("entropy", &opts(&[])).unwrap(), Method::Entropy { num_quantized_bins: 128 });
    assert_eq!(
        Method::parse("entropy", &opts(&[("num_quantized_bins", "255")])).unwrap(),
        Method::Entropy { num_quantized_bins: 255 }
    );
    assert_eq!(Method::parse("distribution", &opts(&[])).unwrap(), Method::Distribution);
    assert_eq!(Method::parse("mse", &opts(&[])).unwrap(), Method::Mse);
    for name in ["minmax", "percentile", "entropy", "distribution", "mse"] {
        assert_eq!(Method::parse(name, &opts(&[])).unwrap().name(), name);
    }
}

#[test]
fn parse_errors_name_what_is_wrong() {
    let e = Method::parse("kl", &opts(&[])).unwrap_err().to_string();
    assert!(e.contains("`kl`") && e.contains("minmax, percentile, entropy, distribution, mse"), "{e}");
    let e = Method::parse("percentile", &opts(&[("pct", "99")])).unwrap_err().to_string();
    assert!(e.contains("`pct`") && e.contains("percentile, symmetric"), "{e}");
    let e = Method::parse("mse", &opts(&[("x", "1")])).unwrap_err().to_string();
    assert!(e.contains("valid options: none"), "{e}");
    for bad in ["0", "100.5", "-1", "nan", "abc"] {
        let e = Method::parse("percentile", &opts(&[("percentile", bad)])).unwrap_err();
        assert!(matches!(e, Error::MethodOption { ref option, .. } if option == "percentile"), "{bad}: {e}");
    }
    for bad in ["1", "0", "-3", "many"] {
        let e = Method::parse("entropy", &opts(&[("num_quantized_bins", bad)])).unwrap_err();
        assert!(matches!(e, Error::MethodOption { ref option, .. } if option == "num_quantized_bins"), "{bad}");
    }
    let e = Method::parse("minmax", &opts(&[("symmetric", "maybe")])).unwrap_err().to_string();
    assert!(e.contains("true or false"), "{e}");
    // compute_ranges validates hand-built methods too
    let s = CalibState::new(CollectOptions::default());
    assert!(compute_ranges(&s, &Method::Percentile { percentile: 0.0, symmetric: true }).is_err());
}

#[test]
fn collect_option_validation() {
    let e = CalibState::try_new(CollectOptions { num_bins: 1, ..Default::default() }).unwrap_err();
    assert!(matches!(e, Error::Options { field: "num_bins", .. }));
    for c in [0.0, -0.5, 1.5, f32::NAN] {
        let e = CalibState::try_new(CollectOptions { moving_average: Some(c), ..Default::default() }).unwrap_err();
        assert!(matches!(e, Error::Options { field: "moving_average", .. }), "{c}");
    }
    assert!(CalibState::try_new(CollectOptions { moving_average: Some(1.0), ..Default::default() }).is_ok());
}
