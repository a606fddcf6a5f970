//! Keys made here and tokens signed with them, for the tests of `proto::oauth` and
//! `crate::auth` (test builds only).

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use ring::rand::SystemRandom;
use ring::signature::{self as sig, KeyPair as _};
use serde_json::{Value, json};

pub(crate) fn enc(v: &Value) -> String {
    URL_SAFE_NO_PAD.encode(serde_json::to_vec(v).unwrap())
}

/// A test signer: an Ed25519 or a P-256 key made here, its JWK, and compact JWS of claims.
pub(crate) enum Signer {
    Ed(sig::Ed25519KeyPair),
    Ec(sig::EcdsaKeyPair),
}

impl Signer {
    pub(crate) fn ed() -> Signer {
        let doc = sig::Ed25519KeyPair::generate_pkcs8(&SystemRandom::new()).unwrap();
        Signer::Ed(sig::Ed25519KeyPair::from_pkcs8(doc.as_ref()).unwrap())
    }

    pub(crate) fn ec() -> Signer {
        let rng = SystemRandom::new();
        let alg = &sig::ECDSA_P256_SHA256_FIXED_SIGNING;
        let doc = sig::EcdsaKeyPair::generate_pkcs8(alg, &rng).unwrap();
        Signer::Ec(sig::EcdsaKeyPair::from_pkcs8(alg, doc.as_ref(), &rng).unwrap())
    }

    pub(crate) fn jwk(&self, kid: &str) -> Value {
        match self {
            Signer::Ed(k) => json!({"kty": "OKP", "crv": "Ed25519", "kid": kid,
                "x": URL_SAFE_NO_PAD.encode(k.public_key().as_ref())}),
            Signer::Ec(k) => {
                let p = k.public_key().as_ref();
                json!({"kty": "EC", "crv": "P-256", "kid": kid, "use": "sig",
                    "x": URL_SAFE_NO_PAD.encode(&p[1..33]), "y": URL_SAFE_NO_PAD.encode(&p[33..])})
            }
        }
    }

    pub(crate) fn alg(&self) -> &'static str {
        match self {
            Signer::Ed(_) => "EdDSA",
            Signer::Ec(_) => "ES256",
        }
    }

    pub(crate) fn sign_with_header(&self, header: &Value, claims: &Value) -> String {
        let input = format!("{}.{}", enc(header), enc(claims));
        let s = match self {
            Signer::Ed(k) => k.sign(input.as_bytes()).as_ref().to_vec(),
            Signer::Ec(k) => {
                k.sign(&SystemRandom::new(), input.as_bytes()).unwrap().as_ref().to_vec()
            }
        };
        format!("{input}.{}", URL_SAFE_NO_PAD.encode(s))
    }

    pub(crate) fn sign(&self, kid: &str, claims: &Value) -> String {
        self.sign_with_header(&json!({"alg": self.alg(), "kid": kid, "typ": "at+jwt"}), claims)
    }
}
