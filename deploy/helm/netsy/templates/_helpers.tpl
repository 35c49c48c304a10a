{{/*
The name of every object: the release name, with the chart's name added
unless the release name already holds it ("netsy" renders as netsy, netsy-0,
netsy-client, ...).
*/}}
{{- define "netsy.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 52 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 52 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{/* The labels that select this release's pods. */}}
{{- define "netsy.selectorLabels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{/* The labels of every object. */}}
{{- define "netsy.labels" -}}
{{ include "netsy.selectorLabels" . }}
{{- end -}}

{{/* Where each Secret is mounted in the container. */}}
{{- define "netsy.tlsDir" -}}/etc/netsy/tls{{- end -}}
{{- define "netsy.peerTLSDir" -}}
{{- if .Values.tls.peerSecret -}}/etc/netsy/peer-tls{{- else -}}/etc/netsy/tls{{- end -}}
{{- end -}}
{{- define "netsy.clientCADir" -}}
{{- if .Values.tls.clientCASecret -}}/etc/netsy/client-ca{{- else -}}/etc/netsy/tls{{- end -}}
{{- end -}}

{{/* --storage: s3://bucket[/prefix]. */}}
{{- define "netsy.storage" -}}
{{- $prefix := .Values.bucket.prefix | trimAll "/" -}}
{{- if $prefix -}}s3://{{ .Values.bucket.name }}/{{ $prefix }}{{- else -}}s3://{{ .Values.bucket.name }}{{- end -}}
{{- end -}}
