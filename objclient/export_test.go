package objclient

// Test hooks for the external test package.

// WithSDKGet makes GetRange go through the SDK's GetObject.
func WithSDKGet(o *Options) { o.sdkGet = true }

// UsesRawGet reports whether s makes its ranged GETs without the SDK.
func UsesRawGet(s *S3) bool { return s.raw != nil }

// WithSDKHead makes Stat go through the SDK's HeadObject.
func WithSDKHead(o *Options) { o.sdkHead = true }

// UsesRawHead reports whether s makes Stat's HEADs without the SDK.
func UsesRawHead(s *S3) bool { return s.rawHead != nil }
