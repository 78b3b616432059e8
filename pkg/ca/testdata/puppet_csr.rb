# Makes an agent key and CSR with Puppet's own code, as `puppet agent` does on
# its first run (RSA key, CN only, extension requests from csr_attributes.yaml).
# Usage: ruby puppet_csr.rb CERTNAME OUTDIR
require 'puppet'

name, dir = ARGV
Puppet::SSL::Oids.register_puppet_oids
key = OpenSSL::PKey::RSA.new(2048)
req = Puppet::SSL::CertificateRequest.new(name)
req.generate(key, extension_requests: {
  'pp_role' => 'webserver',                     # ppRegCertExt, by short name
  '1.3.6.1.4.1.34380.1.2.1' => 'private-value', # ppPrivCertExt
})
File.write(File.join(dir, 'agent_key.pem'), key.to_pem)
File.write(File.join(dir, 'agent_csr.pem'), req.to_s)
puts 'CSR_OK'
