//! Kubeconfigs with an embedded client certificate, shaped like CAPI's admin kubeconfig
//! (docs/formats.md d.2): cluster `<cluster>`, user `<cluster>-admin`, context
//! `<cluster>-admin@<cluster>`, serialized as clientcmd (go-yaml) writes it.

use super::pki::{self, Algorithm, CaPair};
use base64::Engine;
use libnodeagent::base::error::Result;
use libnodeagent::formats::goyaml::{Y, map, s, to_string};
use time::Duration;

/// The user entry name CAPI uses: `<cluster>-admin` for the admin, the user's name otherwise.
pub fn user_entry(cluster: &str, user: &str) -> String {
    if user == "kubernetes-admin" {
        format!("{cluster}-admin")
    } else {
        user.to_string()
    }
}

/// Kubeconfig YAML for `user` (client cert signed by the cluster CA) against `server`.
pub fn build(
    cluster: &str,
    server: &str,
    ca: &CaPair,
    user: &str,
    group: Option<&str>,
    algorithm: Algorithm,
    validity: Duration,
) -> Result<String> {
    let (cert, key) = pki::client_certificate(ca, user, group, algorithm, validity)?;
    Ok(render(
        cluster,
        server,
        &ca.cert_pem,
        &user_entry(cluster, user),
        &cert,
        &key,
    ))
}

/// Pure serialization.
pub fn render(
    cluster: &str,
    server: &str,
    ca_pem: &str,
    user: &str,
    cert_pem: &str,
    key_pem: &str,
) -> String {
    let b64 = |v: &str| s(base64::engine::general_purpose::STANDARD.encode(v));
    let context = format!("{user}@{cluster}");
    to_string(&map([
        ("apiVersion", s("v1")),
        (
            "clusters",
            Y::Seq(vec![map([
                (
                    "cluster",
                    map([
                        ("certificate-authority-data", b64(ca_pem)),
                        ("server", s(server)),
                    ]),
                ),
                ("name", s(cluster)),
            ])]),
        ),
        (
            "contexts",
            Y::Seq(vec![map([
                ("context", map([("cluster", s(cluster)), ("user", s(user))])),
                ("name", s(context.clone())),
            ])]),
        ),
        ("current-context", s(context)),
        ("kind", s("Config")),
        ("preferences", map::<&str>([])),
        (
            "users",
            Y::Seq(vec![map([
                ("name", s(user)),
                (
                    "user",
                    map([
                        ("client-certificate-data", b64(cert_pem)),
                        ("client-key-data", b64(key_pem)),
                    ]),
                ),
            ])]),
        ),
    ]))
}
