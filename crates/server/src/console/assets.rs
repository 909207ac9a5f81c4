//! The console's files, built into the binary: plain HTML, CSS and
//! JavaScript with no build step and nothing loaded from elsewhere.

/// One embedded file: its bytes and content type.
pub struct Asset {
    pub body: &'static [u8],
    pub content_type: &'static str,
}

/// The page every console route answers with.
pub const INDEX: Asset = Asset {
    body: include_bytes!("assets/index.html"),
    content_type: "text/html; charset=utf-8",
};

/// The policy the page runs under: its own files and the daemon only.
pub const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; \
     img-src 'self' data:; connect-src 'self'; form-action 'self'; \
     frame-ancestors 'none'; base-uri 'none'";

/// The asset at `/ui/assets/{name}`, if any.
pub fn get(name: &str) -> Option<Asset> {
    let (body, content_type): (&'static [u8], _) = match name {
        "app.js" => (
            include_bytes!("assets/app.js"),
            "text/javascript; charset=utf-8",
        ),
        "pages.js" => (
            include_bytes!("assets/pages.js"),
            "text/javascript; charset=utf-8",
        ),
        "metrics.js" => (
            include_bytes!("assets/metrics.js"),
            "text/javascript; charset=utf-8",
        ),
        "terminal.js" => (
            include_bytes!("assets/terminal.js"),
            "text/javascript; charset=utf-8",
        ),
        "app.css" => (include_bytes!("assets/app.css"), "text/css; charset=utf-8"),
        "icon.svg" => (include_bytes!("assets/icon.svg"), "image/svg+xml"),
        _ => return None,
    };
    Some(Asset { body, content_type })
}

#[cfg(test)]
mod tests {
    #[test]
    fn assets_are_embedded_and_nothing_comes_from_elsewhere() {
        for n in [
            "app.js",
            "pages.js",
            "terminal.js",
            "metrics.js",
            "app.css",
            "icon.svg",
        ] {
            let a = super::get(n).unwrap();
            let text = std::str::from_utf8(a.body).unwrap();
            assert!(!text.is_empty(), "{n}");
            assert!(!text.contains("https://"), "{n} names an outside URL");
        }
        assert!(super::get("../mod.rs").is_none());
        let index = std::str::from_utf8(super::INDEX.body).unwrap();
        assert!(index.contains("/ui/assets/app.js"));
        assert!(!index.contains("https://"));
    }
}
