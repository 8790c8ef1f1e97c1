// Package v1alpha1 holds winkube's Cluster API infrastructure provider types
// for Azure: clusters, machines, their templates and scale-set machine pools.
//
// +kubebuilder:object:generate=true
// +groupName=infrastructure.winkube.dev
package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

var (
	// GroupVersion is the API group and version of these types.
	GroupVersion = schema.GroupVersion{Group: "infrastructure.winkube.dev", Version: "v1alpha1"}

	schemeBuilder = runtime.NewSchemeBuilder(addKnownTypes)

	// AddToScheme adds the types of this group-version to a scheme.
	AddToScheme = schemeBuilder.AddToScheme

	// objectTypes are the types that each file's init registers. The
	// package builds on apimachinery alone, not controller-runtime, so that
	// importing the API types brings in no more than it has to.
	objectTypes []runtime.Object
)

func register(objs ...runtime.Object) { objectTypes = append(objectTypes, objs...) }

func addKnownTypes(s *runtime.Scheme) error {
	s.AddKnownTypes(GroupVersion, objectTypes...)
	metav1.AddToGroupVersion(s, GroupVersion)
	return nil
}
