{{/* The chart name, overridable. */}}
{{- define "nimbus.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
The name of the release's objects: the release name when it already says "nimbus" (so the
default `helm install nimbus` gives plain `nimbus`, the names config/ uses), else
`<release>-nimbus`. 63 characters at most (label value and DNS label limit).
*/}}
{{- define "nimbus.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := include "nimbus.name" . }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{/* Labels of every object. */}}
{{- define "nimbus.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{ include "nimbus.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/part-of: nimbus
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{/* Labels selecting the operator's pods; immutable once installed. */}}
{{- define "nimbus.selectorLabels" -}}
app.kubernetes.io/name: {{ include "nimbus.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{/* The Lease the replicas elect their leader with (namespaced: the release's). */}}
{{- define "nimbus.leaseName" -}}
{{- include "nimbus.fullname" . }}
{{- end }}

{{/* `--disable-engines` value: the engines switched off, in the operator's spelling. Every
registered engine is a key of files/engine-rbac.yaml (generated from the registration by `make
crds`), so the list is not kept here. */}}
{{- define "nimbus.disabledEngines" -}}
{{- $off := list }}
{{- range $name, $_ := .Files.Get "files/engine-rbac.yaml" | fromYaml }}
{{- if not (index $.Values.engines $name).enabled }}
{{- $off = append $off $name }}
{{- end }}
{{- end }}
{{- join "," $off }}
{{- end }}

{{/* Every verb on a native policy kind: the operator creates, corrects and prunes them. */}}
{{- define "nimbus.ownVerbs" -}}
[get, list, watch, create, patch, update, delete]
{{- end }}

{{/* The posture API's Service: kube-apiserver dials `<it>.<namespace>.svc`. */}}
{{- define "nimbus.postureService" -}}
{{- include "nimbus.fullname" . | trunc 55 | trimSuffix "-" }}-posture
{{- end }}

{{/* The Secret holding the posture API's serving certificate. */}}
{{- define "nimbus.postureSecret" -}}
{{- .Values.posture.certificate.secretName | default (printf "%s-posture-tls" (include "nimbus.fullname" .)) }}
{{- end }}
