use capability_acquire::world::*;

#[test]
fn queries_are_planned_as_the_reference() {
    let cases: [(&str, &[&str]); 5] = [
        (
            "convert separated text to camel case",
            &[
                "separated camel case",
                "separatedcamelcase",
                "separated-camel-case",
                "separated camel",
                "separatedcamel",
                "camel case",
                "camelcase",
                "convert separated text camel case",
            ],
        ),
        (
            "parse a CSV string into records",
            &[
                "csv",
                "parse csv string records",
                "parse a CSV string into records",
            ],
        ),
        (
            "render html to video",
            &[
                "render html video",
                "renderhtmlvideo",
                "render-html-video",
                "render html",
                "renderhtml",
                "html video",
                "htmlvideo",
                "render html to video",
            ],
        ),
        ("a", &[]),
        ("the tool", &["the tool"]),
    ];
    for (query, planned) in cases {
        assert_eq!(plan_queries(query, MAX_QUERIES), planned, "{query}");
    }
    assert_eq!(plan_queries("", MAX_QUERIES), Vec::<String>::new());
    assert_eq!(plan_queries("  render   html  ", 1), ["render html"]);
}

fn npm_candidate(name: &str, description: &str, rank: usize) -> Candidate {
    Candidate {
        source: Source::Npm,
        locator: format!("npm:{name}"),
        name: name.into(),
        version: None,
        description: description.into(),
        repository: None,
        homepage: None,
        language: None,
        license: None,
        popularity: None,
        source_rank: rank,
        score: 0.0,
        signals: Vec::new(),
        adoption: Vec::new(),
    }
}

#[test]
fn relevance_is_the_reference_number() {
    let intent = "convert separated text to camel case";
    // §8.11: camelcase found by the 7th of 8 queries, jss-plugin-camel-case by the 6th.
    let camelcase = npm_candidate("camelcase", "Convert a string to camel case", 1);
    assert_eq!(relevance(intent, &camelcase, 6, 8), 0.6732365714285713);
    let jss = npm_candidate(
        "jss-plugin-camel-case",
        "Camel case style properties for JSS",
        1,
    );
    assert_eq!(relevance(intent, &jss, 5, 8), 0.38594285714285725);
    // The add-on penalty goes when the intent names the host tool.
    assert!(relevance("jss plugin for camel case", &jss, 0, 1) > 0.5);
    // Stars count, up to 1 at 99 999.
    let mut starred = npm_candidate("x", "y", 1);
    let plain = relevance(intent, &starred, 0, 1);
    starred.popularity = Some(99_999.0);
    assert_eq!(relevance(intent, &starred, 0, 1), plain + 0.08);
    // A later rank counts less, and the score never leaves 0..1.
    assert!(
        relevance(intent, &npm_candidate("camelcase", "", 5), 0, 1)
            < relevance(intent, &npm_candidate("camelcase", "", 1), 0, 1)
    );
    assert_eq!(
        relevance("camel", &npm_candidate("react-plugin", "", 100), 7, 8),
        0.0
    );
}

#[test]
fn uri_components_are_encoded_as_javascript_does() {
    assert_eq!(encode_uri_component("camel case"), "camel%20case");
    assert_eq!(encode_uri_component("a+b/c?d&é"), "a%2Bb%2Fc%3Fd%26%C3%A9");
    assert_eq!(encode_uri_component("A-z_0.9!~*'()"), "A-z_0.9!~*'()");
}
