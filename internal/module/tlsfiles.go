package module

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"strings"
)

// The async transport's TLS properties (trust_cacerts, client_cert,
// client_key) name files the way StateFun's ResourceLocator does:
//
//   - a path, absolute or relative to the working directory:
//     /etc/statefun/ca.pem or certs/ca.pem;
//   - a file: URL, as StateFun's own smoke test writes it:
//     file:/etc/statefun/ca.pem, file:///etc/statefun/ca.pem or
//     file://localhost/etc/statefun/ca.pem (percent-escapes are decoded);
//   - classpath:name, a resource inside StateFun's Java class path, which
//     has no counterpart here and is refused.
//
// Any other scheme is refused: StateFun would open http: and jar: URLs too,
// but fetching trust roots over the network at start-up is not something a
// runtime should do quietly.

// maxTLSFileBytes bounds what Load reads from one TLS file. Certificate
// bundles are kilobytes; the bound keeps a misnamed path such as /dev/zero
// from stalling the start.
const maxTLSFileBytes = 1 << 20

// fileLocation turns a StateFun resource location into a file path. It
// returns the problem as text, empty when there is none.
func fileLocation(loc string) (string, string) {
	const want = "want a file path or a file: URL, such as file:/etc/statefun/ca.pem"
	if strings.TrimSpace(loc) == "" {
		return "", "must not be empty; " + want
	}
	scheme, rest, ok := strings.Cut(loc, ":")
	if !ok || len(scheme) < 2 || strings.ContainsAny(scheme, "/\\") {
		// No scheme: a path. A one-letter "scheme" is a drive letter.
		return loc, ""
	}
	switch strings.ToLower(scheme) {
	case "classpath":
		return "", fmt.Sprintf("%q is a resource on StateFun's Java class path, which this runtime does not have; put the file on disk and write its path, such as file:/etc/statefun/%s",
			loc, strings.TrimLeft(rest, "/"))
	case "file":
	default:
		return "", fmt.Sprintf("unsupported scheme %q in %q; %s", scheme, loc, want)
	}
	u, err := url.Parse(loc)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return "", fmt.Sprintf("invalid file: URL %q: %v", loc, err)
	}
	if u.Host != "" && !strings.EqualFold(u.Host, "localhost") {
		return "", fmt.Sprintf("file: URL %q names host %q; only local files can be read, such as file:/etc/statefun/ca.pem", loc, u.Host)
	}
	path := u.Path
	if u.Opaque != "" {
		// file:certs/ca.pem, a relative path.
		if path, err = url.PathUnescape(u.Opaque); err != nil {
			return "", fmt.Sprintf("invalid file: URL %q: %v", loc, err)
		}
	}
	if path == "" {
		return "", fmt.Sprintf("file: URL %q names no file; %s", loc, want)
	}
	return path, ""
}

// readTLSFile reads a TLS file named in module.yaml: a regular file of at
// most maxTLSFileBytes.
func readTLSFile(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("%s is not a regular file", path)
	}
	data, err := io.ReadAll(io.LimitReader(f, maxTLSFileBytes+1))
	if err != nil {
		return nil, err
	}
	if len(data) > maxTLSFileBytes {
		return nil, fmt.Errorf("%s is larger than %d bytes", path, maxTLSFileBytes)
	}
	return data, nil
}

// tlsFile reads one TLS property of the async transport object o: the
// location is resolved, and the file read when the parser reads files. It
// returns the path, the contents (nil when not read) and whether the
// property is present and good.
func (d *doc) tlsFile(o object, name string) (f field, path string, data []byte, ok bool) {
	f = o.get(name)
	if f.node == nil {
		return f, "", nil, false
	}
	loc, ok := d.str(f)
	if !ok {
		return f, "", nil, false
	}
	path, problem := fileLocation(loc)
	if problem != "" {
		d.errorf(f.node, f.path, "%s", problem)
		return f, "", nil, false
	}
	if d.p.readFile == nil {
		return f, path, nil, true
	}
	data, err := d.p.readFile(path)
	if err != nil {
		d.report(f.node, f.path, err, fmt.Sprintf("cannot read %s: %v", loc, unwrapPath(err)))
		return f, "", nil, false
	}
	return f, path, data, true
}

// unwrapPath drops the "open <path>: " of an *os.PathError, whose path the
// message already shows.
func unwrapPath(err error) error {
	var pe *os.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}

// tlsFiles reads the TLS properties of the async transport object o into t,
// checking, when the parser reads files, that they hold what the invoker
// needs: CA certificates, and a client certificate with its unencrypted key.
func (d *doc) tlsFiles(o object, t *Transport) {
	if pf := o.get("client_key_password"); pf.node != nil {
		d.errorf(pf.node, pf.path, "encrypted client keys are not supported; decrypt the key once, for example with openssl pkcs8 -in key.p8 -passin file:password.txt -out key.pem, point client_key at the result and remove client_key_password")
	}

	if f, path, data, ok := d.tlsFile(o, "trust_cacerts"); ok {
		t.TrustCACerts = path
		if data != nil && !x509.NewCertPool().AppendCertsFromPEM(data) {
			d.errorf(f.node, f.path, "%s holds no PEM certificate (want one or more -----BEGIN CERTIFICATE----- blocks)", f.node.Value)
		}
	}

	cf, certPath, certPEM, certOK := d.tlsFile(o, "client_cert")
	kf, keyPath, keyPEM, keyOK := d.tlsFile(o, "client_key")
	switch {
	case cf.node != nil && kf.node == nil:
		d.errorf(cf.key, cf.path, "client_cert needs client_key too (mutual TLS takes both)")
		return
	case cf.node == nil && kf.node != nil:
		d.errorf(kf.key, kf.path, "client_key needs client_cert too (mutual TLS takes both)")
		return
	case !certOK || !keyOK:
		return
	}
	t.ClientCert, t.ClientKey = certPath, keyPath
	if certPEM == nil {
		return
	}
	if !hasPEMBlock(certPEM, "CERTIFICATE") {
		d.errorf(cf.node, cf.path, "%s holds no PEM certificate (want a -----BEGIN CERTIFICATE----- block)", cf.node.Value)
		return
	}
	if hasPEMBlock(keyPEM, "ENCRYPTED PRIVATE KEY") {
		d.errorf(kf.node, kf.path, "%s holds an encrypted key, which is not supported; decrypt it once, for example with openssl pkcs8 -in key.p8 -out key.pem", kf.node.Value)
		return
	}
	if _, err := tls.X509KeyPair(certPEM, keyPEM); err != nil {
		d.report(kf.node, kf.path, err, fmt.Sprintf("%s and %s are not a certificate and its key: %v", cf.node.Value, kf.node.Value, err))
	}
}

// hasPEMBlock reports whether data holds a PEM block of type typ.
func hasPEMBlock(data []byte, typ string) bool {
	for {
		var b *pem.Block
		b, data = pem.Decode(data)
		if b == nil {
			return false
		}
		if b.Type == typ {
			return true
		}
	}
}
