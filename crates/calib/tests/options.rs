//! Option validation and parsing.
use qdq_calib::*;

fn method(name: &str, opts: MethodOptions) -> Result<Method> {
    Method::new(name.parse()?, &opts)
}

#[test]
fn typed_defaults_and_values() {
    let d = MethodOptions::default();
    assert_eq!(method("minmax", d).unwrap(), Method::MinMax { symmetric: false });
    assert_eq!(method("Percentile", d).unwrap(), Method::Percentile { percentile: 99.999, symmetric: false });
    let p = MethodOptions { percentile: 99.9, symmetric: true, ..d };
    assert_eq!(method("percentile", p).unwrap(), Method::Percentile { percentile: 99.9, symmetric: true });
    assert_eq!(method("entropy", d).unwrap(), Method::Entropy { num_quantized_bins: 128 });
    let e = MethodOptions { num_quantized_bins: 255, ..d };
    assert_eq!(method("ENTROPY", e).unwrap(), Method::Entropy { num_quantized_bins: 255 });
    assert_eq!(method("distribution", d).unwrap(), Method::Distribution);
    assert_eq!(method("mse", p).unwrap(), Method::Mse);
    for kind in MethodKind::ALL {
        let m = Method::new(kind, &d).unwrap();
        assert_eq!((m.kind(), m.name()), (kind, kind.to_string().as_str()));
        assert_eq!(kind.name().parse::<MethodKind>().unwrap(), kind);
    }
}

#[test]
fn typed_errors_name_what_is_wrong() {
    let e = "kl".parse::<MethodKind>().unwrap_err().to_string();
    assert!(e.contains("`kl`") && e.contains("minmax, percentile, entropy, distribution, mse"), "{e}");
    for bad in [0.0, 100.5, -1.0, f64::NAN] {
        let e = method("percentile", MethodOptions { percentile: bad, ..Default::default() }).unwrap_err();
        assert!(matches!(e, Error::MethodOption { ref option, .. } if option == "percentile"), "{bad}: {e}");
    }
    for bad in [1, 0] {
        let e = method("entropy", MethodOptions { num_quantized_bins: bad, ..Default::default() }).unwrap_err();
        assert!(matches!(e, Error::MethodOption { ref option, .. } if option == "num_quantized_bins"), "{bad}");
    }
    // Options that do not apply to a method are not checked for it.
    assert!(method("minmax", MethodOptions { percentile: -1.0, ..Default::default() }).is_ok());
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
