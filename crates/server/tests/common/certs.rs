//! Test certificates made with `openssl`: a CA, server and client certificates signed by it,
//! and a certificate from another CA.

use std::path::{Path, PathBuf};
use std::process::Command;

/// A new P-256 key without a passphrase, in `openssl req` arguments.
const NEW_EC_KEY: [&str; 5] = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"];

/// Runs openssl in `dir`; the argument "NEW_EC_KEY" stands for `NEW_EC_KEY`'s five.
pub(crate) fn openssl(dir: &Path, args: &[&str]) {
    let args: Vec<&str> =
        args.iter().flat_map(|&a| if a == "NEW_EC_KEY" { NEW_EC_KEY.to_vec() } else { vec![a] }).collect();
    let output = Command::new("openssl").current_dir(dir).args(&args).output().expect("openssl is installed");
    assert!(output.status.success(), "openssl {args:?}: {}", String::from_utf8_lossy(&output.stderr));
}

/// Makes a certificate `name` signed by CA `ca`, with `extensions` (a v3 extension line).
pub(crate) fn make_cert(dir: &Path, ca: &str, name: &str, extensions: &str) {
    std::fs::write(dir.join(format!("{name}.ext")), extensions).unwrap();
    let (key, csr, pem, ext) =
        (format!("{name}.key"), format!("{name}.csr"), format!("{name}.pem"), format!("{name}.ext"));
    let subject = format!("/CN={name}");
    openssl(dir, &["req", "NEW_EC_KEY", "-keyout", &key, "-out", &csr, "-subj", &subject]);
    let (ca_pem, ca_key) = (format!("{ca}.pem"), format!("{ca}.key"));
    openssl(
        dir,
        &[
            "x509",
            "-req",
            "-in",
            &csr,
            "-CA",
            &ca_pem,
            "-CAkey",
            &ca_key,
            "-CAcreateserial",
            "-out",
            &pem,
            "-days",
            "2",
            "-extfile",
            &ext,
        ],
    );
}

/// A directory with ca.pem, server.pem/key and client.pem/key signed by it, and other.pem/key
/// signed by another CA; `server2.pem/key` is a second server certificate for reloads.
pub(crate) fn certificates(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("tierkv-tls-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    for ca in ["ca", "otherca"] {
        let subject = format!("/CN=tierkv test {ca}");
        let (key, pem) = (format!("{ca}.key"), format!("{ca}.pem"));
        openssl(&dir, &["req", "-x509", "NEW_EC_KEY", "-keyout", &key, "-out", &pem, "-days", "2", "-subj", &subject]);
    }
    let server = "subjectAltName=DNS:localhost,IP:127.0.0.1\nextendedKeyUsage=serverAuth\n";
    make_cert(&dir, "ca", "server", server);
    make_cert(&dir, "ca", "server2", server);
    make_cert(&dir, "ca", "client", "extendedKeyUsage=clientAuth\n");
    make_cert(&dir, "otherca", "other", "extendedKeyUsage=clientAuth\n");
    dir
}
